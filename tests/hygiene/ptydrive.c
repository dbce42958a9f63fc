/* Runs a command with a fresh pseudo-terminal as its controlling terminal
 * and stdin (stdout and stderr stay), waits, then prints how many bytes
 * wait in the terminal's input queue: anything there was injected. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pty.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: ptydrive CMD...\n"); return 2; }
    int master, slave;
    if (openpty(&master, &slave, NULL, NULL, NULL) < 0) { perror("openpty"); return 2; }
    pid_t p = fork();
    if (p < 0) { perror("fork"); return 2; }
    if (p == 0) {
        setsid();
        if (ioctl(slave, TIOCSCTTY, 0) < 0) { perror("TIOCSCTTY"); _exit(2); }
        dup2(slave, 0);
        close(master);
        if (slave > 2) close(slave);
        execvp(argv[1], argv + 1);
        perror("exec");
        _exit(127);
    }
    int status;
    waitpid(p, &status, 0);
    int pending = -1;
    ioctl(slave, FIONREAD, &pending);
    char buf[256];
    fcntl(slave, F_SETFL, O_NONBLOCK);
    struct termios t;
    tcgetattr(slave, &t);
    t.c_lflag &= ~ICANON;
    tcsetattr(slave, TCSANOW, &t);
    ssize_t n = read(slave, buf, sizeof buf - 1);
    if (n < 0) n = 0;
    buf[n] = 0;
    printf("status=%d pending=%d read=[%s]\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1, pending, buf);
    return 0;
}

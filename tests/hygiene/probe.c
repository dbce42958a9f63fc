/* Attempts what a confined command must not be able to do; prints one
 * line per attempt: NAME=ok or NAME=ERRNO. Used by tests/confine_hygiene.rs. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

static void report(const char *name, int r) {
    if (r < 0) printf("%s=%d\n", name, errno); else printf("%s=ok\n", name);
}

static int inet(int type, int proto, int port, int do_connect) {
    int s = socket(AF_INET, type, proto);
    if (s < 0) return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int r;
    if (do_connect) r = connect(s, (struct sockaddr *)&a, sizeof a);
    else r = sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof a);
    int e = errno; close(s); errno = e;
    return r;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "net")) {
        int tcp = atoi(argv[2]), udp = atoi(argv[3]);
        report("tcp", inet(SOCK_STREAM, 0, tcp, 1));
        report("mptcp", inet(SOCK_STREAM, IPPROTO_MPTCP, tcp, 1));
        report("udp", inet(SOCK_DGRAM, 0, udp, 0));
        report("udp_connect", inet(SOCK_DGRAM, 0, udp, 1));
        report("raw", socket(AF_INET, SOCK_RAW, IPPROTO_UDP));
        report("ipv6_udp", socket(AF_INET6, SOCK_DGRAM, 0));
        report("netlink", socket(AF_NETLINK, SOCK_RAW, 0));
        int s = socket(AF_INET, SOCK_STREAM, 0);
        report("listen", s < 0 ? s : listen(s, 1));
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "unix")) {
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        if (s < 0) { report("unix", -1); return 0; }
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        strncpy(a.sun_path, argv[2], sizeof a.sun_path - 1);
        if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) { report("unix", -1); return 0; }
        const char *req = "GET /info HTTP/1.0\r\n\r\n";
        if (write(s, req, strlen(req)) < 0) { report("unix", -1); return 0; }
        char buf[16] = {0};
        ssize_t n = read(s, buf, sizeof buf - 1);
        printf("unix=ok answered=%s\n", n > 0 ? buf : "");
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "tiocsti")) {
        const char *cmd = "echo INJECTED\n";
        int r = 0;
        for (const char *c = cmd; *c && r == 0; c++) r = ioctl(0, TIOCSTI, c);
        report("tiocsti", r);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "fork")) {
        int want = atoi(argv[2]), n = 0;
        for (; n < want; n++) {
            pid_t p = fork();
            if (p < 0) break;
            if (p == 0) { pause(); _exit(0); }
        }
        printf("forked=%d of %d errno=%d\n", n, want, n < want ? errno : 0);
        return 0;
    }
    fprintf(stderr, "usage: probe net TCP UDP | unix PATH | tiocsti | fork N\n");
    return 2;
}

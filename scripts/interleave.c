/*
 * interleave: wall time of several commands measured round by round, each
 * command once per round in a fresh random order, so that every command
 * sees the same machine load (a sequential benchmark lets the load drift
 * between commands; on a shared 2-core VM that moved an A/B ratio by 20%).
 *
 *   interleave ROUNDS WARMUP NAME CMDLINE [NAME CMDLINE]...
 *
 * A command line is split on spaces (no quoting) and started with
 * posix_spawnp (vfork-like, as hyperfine -N; PATH searched), stdout and stderr to
 * /dev/null. Prints, per command: NAME median p10 p90 min (ms), one per
 * line, tab-separated. Exits non-zero if a command fails to start or
 * exits non-zero.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char **split(char *line) {
    size_t n = 0, cap = 8;
    char **argv = malloc(cap * sizeof *argv);
    for (char *tok = strtok(line, " "); tok; tok = strtok(NULL, " ")) {
        if (n + 2 > cap) argv = realloc(argv, (cap *= 2) * sizeof *argv);
        argv[n++] = tok;
    }
    argv[n] = NULL;
    return argv;
}

static double run(char **argv, posix_spawn_file_actions_t *fa) {
    pid_t pid;
    double t0 = now_ms();
    if (posix_spawnp(&pid, argv[0], fa, NULL, argv, environ) != 0) {
        fprintf(stderr, "interleave: cannot start %s\n", argv[0]);
        exit(2);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {}
    double dt = now_ms() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "interleave: %s failed (status %d)\n", argv[0], st);
        exit(3);
    }
    return dt;
}

int main(int argc, char **argv) {
    if (argc < 5 || (argc - 3) % 2 != 0) {
        fprintf(stderr, "usage: interleave ROUNDS WARMUP NAME CMDLINE [NAME CMDLINE]...\n");
        return 2;
    }
    int rounds = atoi(argv[1]), warmup = atoi(argv[2]), n = (argc - 3) / 2;
    char **names = malloc(n * sizeof *names);
    char ***cmds = malloc(n * sizeof *cmds);
    double **times = malloc(n * sizeof *times);
    int *order = malloc(n * sizeof *order);
    for (int i = 0; i < n; i++) {
        names[i] = argv[3 + 2 * i];
        cmds[i] = split(strdup(argv[4 + 2 * i]));
        times[i] = malloc(rounds * sizeof **times);
        order[i] = i;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    srand((unsigned)time(NULL));
    for (int r = -warmup; r < rounds; r++) {
        for (int i = n - 1; i > 0; i--) {
            int j = rand() % (i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < n; k++) {
            double dt = run(cmds[order[k]], &fa);
            if (r >= 0) times[order[k]][r] = dt;
        }
    }
    for (int i = 0; i < n; i++) {
        qsort(times[i], rounds, sizeof **times, cmp);
        printf("%s\t%.3f\t%.3f\t%.3f\t%.3f\n", names[i], times[i][rounds / 2],
               times[i][rounds / 10], times[i][rounds * 9 / 10], times[i][0]);
    }
    return 0;
}

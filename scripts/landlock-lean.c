/*
 * landlock-lean: the leanest Landlock sandboxes a user would write by hand,
 * the Landlock peers of scripts/bench-confine.sh (as the lean bwrap line is
 * bwrap's).
 *
 *   landlock-lean READ WRITE PROGRAM [ARG]...
 *   landlock-lean --guarded CGROUP_PARENT READ WRITE PROGRAM [ARG]...
 *
 * READ and WRITE are colon-separated path lists (a missing path is
 * skipped). Every file-system right the kernel's Landlock ABI knows is
 * handled; READ gets read and execute, WRITE every right.
 *
 * Plain: what small Landlock launchers do and nothing more. no_new_privs,
 * landlock_restrict_self, a new session (no terminal to inject into) and
 * execvp of PROGRAM in place: no fork, no supervisor, no process limit,
 * no seccomp program, no capability drop, no network or scope rules, no
 * policy to read.
 *
 * --guarded: the same, plus the run-time guarantees vibesys's Landlock
 * launch keeps, each in its leanest form, so that what they cost is
 * measured apart from vibesys itself:
 *   - a pids cgroup of the run below CGROUP_PARENT (pids.max 4096),
 *     joined by the command before exec (through v1's `tasks`, as vibesys
 *     does); with "-" (no cgroup) and not root, as vibesys bounds an
 *     unprivileged caller: RLIMIT_NPROC 4096 in a user namespace of the
 *     run's own;
 *   - the launcher stays the parent, a subreaper; when the command
 *     exits, everything left (in the cgroup, or reparented to it) is
 *     killed and reaped, and the cgroup removed, before it returns;
 *   - with a cgroup, a watchdog process beside it that kills the
 *     cgroup's processes if the launcher dies first (parent-death
 *     signal); without one, a killed launcher leaves the command's
 *     descendants running (vibesys puts a supervisor process between
 *     itself and the command for that: this peer leaves out that
 *     process and its cost);
 *   - in the command's process: parent-death signal, a new session, every
 *     capability dropped (securebits locked, bounding set, ambient,
 *     effective, permitted, inheritable), no_new_privs, Landlock with
 *     signals and abstract Unix sockets scoped to the sandbox (ABI 6), and
 *     a seccomp program of vibesys's shape (architecture and x32 checks;
 *     ptrace, process_vm_*, io_uring_*, keyctl, add_key, request_key, bpf
 *     and userfaultfd refused; openat2 refused; socket(AF_UNIX) refused;
 *     TIOCSTI and TIOCLINUX refused; set-id mode bits refused in chmod,
 *     fchmod, fchmodat, mknod, mknodat and a creating openat: 74
 *     instructions, against the 53 of vibesys's Landlock program, which
 *     shares its blocks).
 * It reads no policy and looks up no host resources: that part of
 * vibesys's cost is what it leaves out. With READ and WRITE given as "-",
 * the command gets the supervision alone (cgroup, subreaper, watchdog,
 * parent-death signal, new session): no Landlock, no seccomp program, no
 * capability drop, for a command that brings its own (bwrap: the lean
 * peer of vibesys's bwrap launch with its supervision).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define READ_RIGHTS (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
/* The rights a rule on a file (not a directory) may carry: execute,
 * write, read, truncate (ABI 3, bit 14) and ioctl on devices (ABI 5,
 * bit 15). */
#define FILE_RIGHTS (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE | (1ULL << 14) | (1ULL << 15))

static int add_rules(int ruleset, char *list, uint64_t rights, uint64_t handled) {
    for (char *path = strtok(list, ":"); path; path = strtok(NULL, ":")) {
        int fd = open(path, O_PATH | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat st;
        uint64_t allowed = rights & handled;
        if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
            allowed &= FILE_RIGHTS;
        struct landlock_path_beneath_attr rule = {.allowed_access = allowed, .parent_fd = fd};
        if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) != 0) {
            perror(path);
            return -1;
        }
        close(fd);
    }
    return 0;
}

/* --guarded: the ruleset also scopes signals and abstract Unix sockets to
 * the sandbox (ABI 6), as vibesys's does. */
static int guarded_scopes;

static int ruleset_for(char *read, char *write) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) {
        perror("landlock");
        return -1;
    }
    /* ABI 1: bits 0-12; 2 adds refer (13); 3 truncate (14); 5 ioctl_dev (15). */
    int bits = abi >= 5 ? 16 : abi >= 3 ? 15 : abi >= 2 ? 14 : 13;
    /* The ruleset attribute as of ABI 6 (older headers lack `scoped`). */
    struct {
        uint64_t handled_access_fs, handled_access_net, scoped;
    } attr = {.handled_access_fs = (1ULL << bits) - 1};
    size_t size = 8;
    if (guarded_scopes && abi >= 6) {
        attr.scoped = 3; /* abstract Unix sockets and signals */
        size = sizeof attr;
    }
    int ruleset = syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (ruleset < 0) {
        perror("landlock_create_ruleset");
        return -1;
    }
    if (add_rules(ruleset, read, READ_RIGHTS, attr.handled_access_fs) != 0 ||
        add_rules(ruleset, write, attr.handled_access_fs, attr.handled_access_fs) != 0)
        return -1;
    return ruleset;
}

/* --- the seccomp program ------------------------------------------------ */

#define LD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LD_ARG(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
#define EPERM_ (SECCOMP_RET_ERRNO | EPERM)

static struct sock_filter program[96];
static unsigned short length;

static void emit(struct sock_filter f) { program[length++] = f; }

/* if nr == NR: return the mode check of argument ARG (set-id bits refused). */
static void mode_rule(int nr, int arg) {
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 4));
    emit((struct sock_filter)LD_ARG(arg));
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 06000, 0, 1));
    emit((struct sock_filter)RET(EPERM_));
    emit((struct sock_filter)RET(SECCOMP_RET_ALLOW));
}

static void build_program(void) {
    static const int denied[] = {SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev,
                                 SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
                                 SYS_keyctl, SYS_add_key, SYS_request_key, SYS_bpf, SYS_userfaultfd};
    emit((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
    emit((struct sock_filter)RET(SECCOMP_RET_KILL_PROCESS));
    emit((struct sock_filter)LD_NR);
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1)); /* x32 */
    emit((struct sock_filter)RET(SECCOMP_RET_KILL_PROCESS));
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
        emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, denied[i], 0, 1));
        emit((struct sock_filter)RET(EPERM_));
    }
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1));
    emit((struct sock_filter)RET(SECCOMP_RET_ERRNO | ENOSYS));
    /* socket(AF_UNIX, ...): no named socket outside is reachable. */
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 4));
    emit((struct sock_filter)LD_ARG(0));
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1));
    emit((struct sock_filter)RET(SECCOMP_RET_ERRNO | EACCES));
    emit((struct sock_filter)RET(SECCOMP_RET_ALLOW));
    /* ioctl(fd, TIOCSTI | TIOCLINUX) */
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ioctl, 0, 5));
    emit((struct sock_filter)LD_ARG(1));
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 1, 0));
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 0, 1));
    emit((struct sock_filter)RET(EPERM_));
    emit((struct sock_filter)RET(SECCOMP_RET_ALLOW));
    mode_rule(SYS_chmod, 1);
    mode_rule(SYS_fchmod, 1);
    mode_rule(SYS_fchmodat, 2);
    mode_rule(SYS_mknod, 1);
    mode_rule(SYS_mknodat, 2);
    /* openat(dir, path, flags, mode): the mode only when O_CREAT. */
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 0, 6));
    emit((struct sock_filter)LD_ARG(2));
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, O_CREAT, 0, 3));
    emit((struct sock_filter)LD_ARG(3));
    emit((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 06000, 0, 1));
    emit((struct sock_filter)RET(EPERM_));
    emit((struct sock_filter)RET(SECCOMP_RET_ALLOW));
    emit((struct sock_filter)RET(SECCOMP_RET_ALLOW));
}

/* --- the run's cgroup ----------------------------------------------------- */

static char cgroup_dir[4096], cgroup_procs[4200], cgroup_join[4200];

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n < 0 ? -1 : 0;
}

/* Kills every process listed in the file at `path` (a cgroup's
 * cgroup.procs, or the subreaper's own children); returns how many were
 * listed. */
static int kill_listed(const char *path) {
    char buf[8192];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    int listed = 0;
    /* Pids separated by newlines (cgroup.procs) or spaces (children). */
    for (char *p = buf, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p) {
            end = p + 1;
            continue;
        }
        if (pid > 0) {
            kill((pid_t)pid, SIGKILL);
            listed++;
        }
    }
    return listed;
}

static void on_parent_death(int sig) {
    (void)sig;
    while (kill_listed(cgroup_procs) > 0)
        usleep(1000);
    rmdir(cgroup_dir);
    _exit(0);
}

/* Without a cgroup, as vibesys bounds an unprivileged caller: a user
 * namespace of the run's own (the same ids mapped) and RLIMIT_NPROC,
 * which the kernel counts per user namespace. */
static int bound_by_user_namespace(void) {
    char map[64];
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER) != 0 || write_file("/proc/self/setgroups", "deny") != 0)
        return -1;
    snprintf(map, sizeof map, "%u %u 1", (unsigned)uid, (unsigned)uid);
    if (write_file("/proc/self/uid_map", map) != 0)
        return -1;
    snprintf(map, sizeof map, "%u %u 1", (unsigned)gid, (unsigned)gid);
    if (write_file("/proc/self/gid_map", map) != 0)
        return -1;
    struct rlimit limit = {4096, 4096};
    return setrlimit(RLIMIT_NPROC, &limit);
}

static int guarded(char *parent, char *read, char *write, char **argv) {
    int use_cgroup = strcmp(parent, "-") != 0;
    pid_t me = getpid();
    if (use_cgroup) {
        snprintf(cgroup_dir, sizeof cgroup_dir, "%s/landlock-lean-%d", parent, (int)me);
        snprintf(cgroup_procs, sizeof cgroup_procs, "%s/cgroup.procs", cgroup_dir);
        /* As vibesys joins: v1's `tasks` moves the single-threaded child
         * without the global threadgroup lock (whose RCU synchronisation
         * costs milliseconds); v2 has only cgroup.procs. */
        snprintf(cgroup_join, sizeof cgroup_join, "%s/tasks", cgroup_dir);
        char max[4200];
        snprintf(max, sizeof max, "%s/pids.max", cgroup_dir);
        if (mkdir(cgroup_dir, 0755) != 0 || write_file(max, "4096") != 0) {
            perror(cgroup_dir);
            return 125;
        }
        if (access(cgroup_join, F_OK) != 0)
            memcpy(cgroup_join, cgroup_procs, sizeof cgroup_procs);
    }
    int confine = strcmp(read, "-") != 0 || strcmp(write, "-") != 0;
    guarded_scopes = 1;
    int ruleset = confine ? ruleset_for(read, write) : -1;
    if (confine && ruleset < 0)
        return 125;
    build_program();
    struct sock_fprog prog = {.len = length, .filter = program};
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    pid_t watchdog = -1;
    if (use_cgroup) {
        watchdog = fork();
        if (watchdog == 0) {
            signal(SIGTERM, on_parent_death);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != me)
                on_parent_death(0);
            for (;;)
                pause();
        }
    }

    pid_t child = fork();
    if (child == 0) {
        if (use_cgroup && write_file(cgroup_join, "0") != 0)
            _exit(125);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(125);
        setsid();
        if (!use_cgroup && getuid() != 0 && bound_by_user_namespace() != 0)
            _exit(125);
        if (!confine) {
            execvp(argv[0], argv);
            _exit(127);
        }
        /* Every capability: securebits locked, bounding set, ambient, then
         * effective, permitted and inheritable. */
        prctl(PR_SET_SECUREBITS, 0x2f, 0, 0, 0);
        for (int cap = 0; cap < 64; cap++)
            if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
                break;
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_landlock_restrict_self, ruleset, 0) != 0 ||
            syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
            _exit(125);
        struct {
            uint32_t version;
            int pid;
        } header = {0x20080522, 0};
        uint32_t data[6] = {0};
        if (syscall(SYS_capset, &header, data) != 0)
            _exit(125);
        execvp(argv[0], argv);
        _exit(127);
    }
    if (confine)
        close(ruleset);
    int status = 0, code = 125;
    if (child > 0 && waitpid(child, &status, 0) == child)
        code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* Nothing the command left behind outlives the run. */
    if (use_cgroup) {
        /* Until the cgroup is empty (a process leaves it as it exits),
         * then the watchdog; then every zombie is reaped. */
        while (kill_listed(cgroup_procs) > 0)
            sched_yield();
        if (watchdog > 0)
            kill(watchdog, SIGKILL);
        while (waitpid(-1, NULL, 0) > 0)
            ;
    } else {
        /* No cgroup (and no watchdog): what the command left behind is
         * reparented to this subreaper; kill and reap until none is left. */
        while (kill_listed("/proc/thread-self/children") > 0)
            while (waitpid(-1, NULL, 0) > 0)
                ;
    }
    if (use_cgroup)
        while (rmdir(cgroup_dir) != 0 && errno == EBUSY)
            usleep(100);
    return code;
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[1], "--guarded") == 0)
        return guarded(argv[2], argv[3], argv[4], argv + 5);
    if (argc < 4) {
        fprintf(stderr, "usage: landlock-lean [--guarded CGROUP_PARENT] READ WRITE PROGRAM [ARG]...\n");
        return 125;
    }
    int ruleset = ruleset_for(argv[1], argv[2]);
    if (ruleset < 0)
        return 125;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
        perror("landlock_restrict_self");
        return 125;
    }
    close(ruleset);
    setsid();
    execvp(argv[3], argv + 3);
    perror(argv[3]);
    return 127;
}

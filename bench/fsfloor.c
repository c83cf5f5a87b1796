/* The file-system floor of one create-only object on the local store: only
 * the unavoidable system calls, N times, in one directory, with the wall and
 * CPU time each costs. docs/BENCHMARKS.md, "The local store reuses deleted
 * files", has the figures.
 *
 *   cc -O2 -o /tmp/fsfloor bench/fsfloor.c
 *   mkdir /tmp/d && /tmp/fsfloor /tmp/d tmpfile 3000 4096
 *
 * Modes:
 *   tmpfile    O_TMPFILE + write + fdatasync + linkat + directory fsync
 *              (a new file per object)
 *   overwrite  write over one file that exists + fdatasync (an append log)
 *   pooled     write over a file made beforehand + fdatasync +
 *              renameat2(RENAME_NOREPLACE) + directory fsync (the reuse pool)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6 + r.ru_utime.tv_sec +
           r.ru_utime.tv_usec / 1e6;
}

static void check(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s DIR tmpfile|overwrite|pooled N [BYTES]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1], *mode = argv[2];
    int n = atoi(argv[3]), bytes = argc > 4 ? atoi(argv[4]) : 4096;
    char *buf = malloc(bytes), from[512], to[512];
    memset(buf, 'x', bytes);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    check(dfd >= 0, "open dir");
    if (!strcmp(mode, "pooled")) {
        for (int i = 0; i < n; i++) {
            snprintf(from, sizeof from, "%s/pool#%d", dir, i);
            int fd = open(from, O_CREAT | O_WRONLY, 0644);
            check(fd >= 0, "create pool file");
            close(fd);
        }
        fsync(dfd);
    } else if (!strcmp(mode, "overwrite")) {
        snprintf(from, sizeof from, "%s/log", dir);
        int fd = open(from, O_CREAT | O_WRONLY, 0644);
        check(fd >= 0 && write(fd, buf, bytes) == bytes && fsync(fd) == 0, "create log");
        close(fd);
    }
    double wall0 = wall_s(), cpu0 = cpu_s();
    for (int i = 0; i < n; i++) {
        snprintf(to, sizeof to, "%s/%020d", dir, i);
        if (!strcmp(mode, "tmpfile")) {
            int fd = open(dir, O_TMPFILE | O_WRONLY, 0644);
            check(fd >= 0 && write(fd, buf, bytes) == bytes && fdatasync(fd) == 0, "write");
            char proc[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
            check(linkat(AT_FDCWD, proc, AT_FDCWD, to, AT_SYMLINK_FOLLOW) == 0, "linkat");
            check(fsync(dfd) == 0, "fsync dir");
            close(fd);
        } else if (!strcmp(mode, "overwrite")) {
            int fd = open(from, O_WRONLY);
            check(fd >= 0 && pwrite(fd, buf, bytes, 0) == bytes && fdatasync(fd) == 0, "write");
            close(fd);
        } else if (!strcmp(mode, "pooled")) {
            snprintf(from, sizeof from, "%s/pool#%d", dir, i);
            int fd = open(from, O_WRONLY);
            check(fd >= 0 && pwrite(fd, buf, bytes, 0) == bytes, "write");
            check(ftruncate(fd, bytes) == 0 && fdatasync(fd) == 0, "sync");
            check(syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0,
                  "renameat2");
            check(fsync(dfd) == 0, "fsync dir");
            close(fd);
        } else {
            fprintf(stderr, "unknown mode %s\n", mode);
            return 2;
        }
    }
    double wall = wall_s() - wall0, cpu = cpu_s() - cpu0;
    printf("{\"mode\":\"%s\",\"objects\":%d,\"bytes\":%d,\"wall_us\":%.1f,\"cpu_us\":%.1f}\n",
           mode, n, bytes, wall / n * 1e6, cpu / n * 1e6);
    return 0;
}

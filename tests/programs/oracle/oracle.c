/* The program the record-full oracle test debugs backwards under rtit and under gdb's own
   `record full`: calls into the C library (string routines, printf, qsort), system calls that
   write memory (pipe, read, readv, getresuid, fstat), reads of the time (through the vDSO where
   there is one), and a signal caught by a handler. Built -O0 so every local lives in memory. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

int total;
volatile sig_atomic_t hits;
char line[64];

static int compare(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}

static void handler(int sig) {
    hits += sig;
}

static int sum(const int *v, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s;
}

int main(void) {
    int values[6] = {42, 7, 19, 3, 88, 11};
    char buf[32] = {0}, first[8] = {0}, second[8] = {0};
    int fds[2];
    uid_t ruid = 0, euid = 0, suid = 0;
    struct stat st;
    struct timespec ts = {0, 0};
    struct timeval tv = {0, 0};
    struct sigaction sa;

    size_t n = strlen("the quick brown fox");
    snprintf(line, sizeof line, "%zu letters, %d values", n, 6);
    qsort(values, 6, sizeof values[0], compare);
    total = sum(values, 6);
    printf("%s, sum %d\n", line, total);
    pipe(fds);
    write(fds[1], "abcdefghijklmnopqrstuvwxyz", 26);
    ssize_t got = read(fds[0], buf, 10);
    struct iovec iov[2] = {{first, 4}, {second, 4}};
    ssize_t gotv = readv(fds[0], iov, 2);
    getresuid(&ruid, &euid, &suid);
    fstat(fds[0], &st);
    clock_gettime(CLOCK_REALTIME, &ts);
    gettimeofday(&tv, NULL);
    time_t now = time(NULL);
    /* time() reads the kernel's coarse clock, which lags CLOCK_REALTIME by up to a tick:
       right after a second begins it may still say the second before (a run of the native
       side printed 0 here once). */
    int later = ts.tv_sec > 1600000000 && tv.tv_sec >= ts.tv_sec && now + 1 >= ts.tv_sec;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    kill(getpid(), SIGUSR1);
    total += (int)got + (int)gotv + hits + later;
    printf("%s %s %s %d %d\n", buf, first, second, total, S_ISFIFO(st.st_mode));
    return ruid == euid ? 0 : 1;
}

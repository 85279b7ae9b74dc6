/* A 1 ms interval timer interrupting a computation whose registers stay live across the
   handler, with a read(2) each round: after every handler's return the interrupted code goes
   on with its own registers, which replay must show (rt_sigreturn's result under QEMU is not
   the program's rax). Prints what it computed; `done` is where a debugger looks. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <unistd.h>

volatile int count;
char buf[64];

static void handler(int sig) {
    (void)sig;
    count++;
}

static long work(long n) {
    long s = 0;
    for (long i = 0; i < n; i++)
        s += i * i ^ (s >> 3);
    return s;
}

__attribute__((noinline)) void done(long acc, long nread, int signals) {
    printf("acc=%ld nread=%ld signals=%d\n", acc, nread, signals);
}

int main(int argc, char **argv) {
    struct sigaction sa = {0};
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    int fd = open(argc > 1 ? argv[1] : "/proc/self/exe", O_RDONLY);
    long acc = 0, nread = 0;
    for (int round = 0; round < 400; round++) {
        acc += work(20000);
        if (lseek(fd, 0, SEEK_SET) == 0)
            nread += read(fd, buf, sizeof buf - 1);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    done(acc, nread, count);
    return 0;
}

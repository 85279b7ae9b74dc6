/* Asynchronous signals: an interval timer interrupts a busy loop 100 times, wherever it is.
   Under the qemu backend the interrupted block's last branch may not have been taken yet when
   the signal arrives; the recording must still decode completely (no overflow gap). */
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>

static volatile long delivered;

static void on_alarm(int sig) {
    (void)sig;
    delivered++;
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &every, NULL);
    volatile unsigned long x = 0;
    for (unsigned long i = 0; delivered < 100; i++) {
        x += i & 7 ? i : 3;
    }
    struct itimerval stop = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &stop, NULL);
    printf("%ld signals\n", delivered);
    return 0;
}

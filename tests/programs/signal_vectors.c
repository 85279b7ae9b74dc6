/* A signal handler that uses the vector registers (snprintf's string routines and a double):
   after rt_sigreturn the interrupted code has its own vector state back, which the kernel
   restores from the frame. Replay must show that state, never the handler's. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

char buf[256];
volatile double d = 1.5;

static void handler(int sig) {
    d = d * 3.25 + sig;
    snprintf(buf, sizeof buf, "signal %d %f and some text to make strlen use vectors", sig, d);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < 3; i++) {
        raise(SIGUSR1);
    }
    printf("%s\n", buf);
    return 0;
}

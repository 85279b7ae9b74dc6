/* Signal handlers: raise() with a handler, and a SIGSEGV handler that recovers with
   siglongjmp. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>

static volatile sig_atomic_t got;
static sigjmp_buf recover;

static void on_usr1(int sig) { got += sig; }
static void on_segv(int sig) { (void)sig; siglongjmp(recover, 1); }

int main(void) {
    signal(SIGUSR1, on_usr1);
    signal(SIGSEGV, on_segv);
    raise(SIGUSR1);
    raise(SIGUSR1);
    int faults = 0;
    if (sigsetjmp(recover, 1) == 0) {
        volatile int *p = (int *)16;
        *p = 1; /* faults: the handler takes us back */
    } else {
        faults++;
    }
    printf("got %d faults %d\n", (int)got, faults);
    return got == 2 * SIGUSR1 && faults == 1 ? 0 : 1;
}

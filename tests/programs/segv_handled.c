/* Faults a SIGSEGV handler recovers from (siglongjmp), on a block's last instruction (a call
   through a function table that is not there: it reads memory and ends its block) and in
   the middle of one (a store to address 16 between two others). The handler's entry comes
   right after the instructions that retired: the faulting one did not. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>

struct ops {
    void *unused;
    void (*run)(void);
};

static struct ops *volatile table;
static volatile int before, after;
static sigjmp_buf recover;

static void on_segv(int sig) { siglongjmp(recover, sig); }

int main(void) {
    signal(SIGSEGV, on_segv);
    int faults = 0;
    for (int i = 0; i < 3; i++) {
        if (sigsetjmp(recover, 1) == 0)
            table->run();
        else
            faults++;
        if (sigsetjmp(recover, 1) == 0) {
            before = i;
            *(volatile int *)16 = i;
            after = i;
        } else {
            faults++;
        }
    }
    printf("faults %d\n", faults);
    return faults == 6 ? 0 : 1;
}

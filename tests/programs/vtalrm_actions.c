/* Sets SIGVTALRM (the signal `rtit record` stops the program with for samples and anchors)
   to ignored, works, sets it back to the default, and works again. QEMU 9 and later set the
   host's action with the program's, which took away the handler that lets the signal reach
   QEMU's gdbstub: anchors and samples stopped without a word. */
#include <signal.h>
#include <stdio.h>

static unsigned long work(unsigned long n) {
    volatile unsigned long s = 0;
    for (unsigned long i = 0; i < n; i++)
        s += i;
    return s;
}

int main(void) {
    signal(SIGVTALRM, SIG_IGN);
    unsigned long a = work(3000000);
    signal(SIGVTALRM, SIG_DFL);
    unsigned long b = work(3000000);
    printf("%lu\n", (a + b) & 1);
    return 0;
}

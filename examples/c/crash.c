/* A crash: a NULL-ish store with no SIGSEGV handler. */
#include <stdio.h>

static int depth(volatile int *p, int n) { return n ? depth(p, n - 1) + 1 : (*p = n); }

int main(void) {
    puts("about to crash");
    fflush(stdout);
    return depth((int *)8, 3);
}

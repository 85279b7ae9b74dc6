/* Says it runs, naps for up to 30 s (10 ms at a time), then calls `after_naps`: for the tests
   that stop or kill rtit record while it runs. They pass a marker argument to find what is
   left of a run in /proc, and record from `after_naps` to be stopped before the start point. */
#include <stdio.h>
#include <time.h>

__attribute__((noinline)) void after_naps(void) { puts("done"); }

int main(void) {
    puts("running");
    fflush(stdout);
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 3000; i++)
        nanosleep(&nap, NULL);
    after_naps();
    return 0;
}

/* Reads the time stamp counter with RDTSC and RDTSCP in a loop and folds what they return
   into its registers: under QEMU 9.0 and later the recording logs each result, so replay
   knows every value that depends on them. It naps 10 ms a round, so that `--truth`'s samples
   (taken at random moments, 3 to 13 ms apart) fall inside the loop, where the folded value is
   live, however fast the machine runs. */
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

int main(void) {
    unsigned long long folded = 0;
    unsigned aux;
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 8; i++) {
        folded += __rdtsc();
        folded ^= __rdtscp(&aux) + aux;
        nanosleep(&nap, NULL);
    }
    printf("%llu\n", folded & 1);
    return 0;
}

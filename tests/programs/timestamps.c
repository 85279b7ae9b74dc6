/* Reads the time stamp counter with RDTSC and RDTSCP in a loop and folds what they return
   into its registers: under QEMU 9.0 and later the recording logs each result, so replay
   knows every value that depends on them. */
#include <stdio.h>
#include <x86intrin.h>

int main(void) {
    unsigned long long folded = 0;
    unsigned aux;
    for (int i = 0; i < 8; i++) {
        folded += __rdtsc();
        folded ^= __rdtscp(&aux) + aux;
    }
    printf("%llu\n", folded & 1);
    return 0;
}

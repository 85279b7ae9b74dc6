/* Dynamically linked: calls into libc through the PLT and into the vDSO (clock_gettime). */
#include <stdio.h>
#include <time.h>

int main(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_gettime(CLOCK_MONOTONIC, &b);
    int ok = b.tv_sec > a.tv_sec || (b.tv_sec == a.tv_sec && b.tv_nsec >= a.tv_nsec);
    printf("monotonic %s\n", ok ? "yes" : "no");
    return ok ? 0 : 1;
}

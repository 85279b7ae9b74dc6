/* Reads the time the three ways the C library offers, which go through the vDSO where there
   is one, and prints what it read: a replay must show the same values. */
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

struct timespec ts;
struct timeval tv;
time_t t;

int main(void) {
    clock_gettime(CLOCK_REALTIME, &ts);
    gettimeofday(&tv, NULL);
    t = time(NULL);
    printf("%lld %ld %lld %ld %lld\n", (long long)ts.tv_sec, ts.tv_nsec, (long long)tv.tv_sec, (long)tv.tv_usec,
           (long long)t);
    return 0;
}

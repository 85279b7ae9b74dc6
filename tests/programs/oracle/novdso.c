/* Preloaded into the program under gdb's `record full` (not under rtit): the time calls as
   system calls, since in the vDSO they run `rdtscp`, which gdb 13's process record does not
   support. rtit hides the vDSO itself (step backend); QEMU 7.2 has none. */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int clock_gettime(clockid_t clock, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, clock, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    return (int)syscall(SYS_gettimeofday, tv, tz);
}

time_t time(time_t *t) {
    return (time_t)syscall(SYS_time, t);
}

/* Watchpoints (tests/watchpoints.rs): a global written from several functions, through a
 * pointer, in a loop, by libc's memcpy and memset and by the kernel (read), a local of a
 * recursive function, and a store through an address the replay cannot know (rdtsc's result,
 * which the qemu backend records under QEMU 9.0 and later only). */
#include <fcntl.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
#include <x86intrin.h>

long target;
long other[64];
volatile size_t eight = sizeof(long);

static void set_direct(long v) { target = v; }
static void set_through(long *p, long v) { *p = v; }
static void churn(void) { for (int i = 0; i < 64; i++) other[i] = i * 3; }

static int depth(int n) {
    int local = n * 10;
    if (n > 0)
        local += depth(n - 1);
    local += 1;
    return local;
}

int main(int argc, char **argv) {
    long copy = 7, zero = 0;
    set_direct(1);
    churn();
    set_through(&target, 2);
    for (int i = 0; i < 3; i++)
        target += i + 1;
    memcpy(&target, &copy, eight);
    memset(&target, 9, eight);
    int fd = open("/dev/zero", O_RDONLY);
    if (read(fd, &target, eight) != (ssize_t)eight)
        return 1;
    close(fd);
    long r = target + other[5];
    int d = depth(3);
    set_direct(42);
    if (argc > 1)
        other[__rdtsc() & 63] = zero;
    printf("%ld %ld %d\n", target, r, d);
    return 0;
}

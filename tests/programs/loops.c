/* A program whose instruction stream does not depend on the CPU model: no libc (whose string
   routines are picked by CPUID), only its own loops, calls, a jump table and system calls.
   Built with -nostdlib -static; the step and qemu backends must record the same
   instructions. */
typedef unsigned long u64;

static long sys3(long nr, long a, long b, long c) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
}

static u64 fib(u64 n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) static u64 step(u64 x, int k) {
    switch (k & 7) {
    case 0: return x * 3 + 1;
    case 1: return x ^ (x >> 3);
    case 2: return x + 17;
    case 3: return x * 5;
    case 4: return x - 9;
    case 5: return x << 1;
    case 6: return x | 0x55;
    default: return x / 3 + 2;
    }
}

static char buf[64];

int main(void) {
    u64 acc = fib(15);
    for (int i = 0; i < 500; i++)
        acc = step(acc, i);
    for (int i = 0; i < 16; i++)
        buf[i] = "0123456789abcdef"[(acc >> (4 * i)) & 15];
    buf[16] = '\n';
    sys3(1, 1, (long)buf, 17);
    return (int)(acc & 1);
}

__attribute__((noreturn)) void _start(void) {
    int status = main();
    for (;;)
        sys3(231, status, 0, 0);
}

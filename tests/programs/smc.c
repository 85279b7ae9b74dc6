/* Code that stores into its own block: a function in a page the program writes and runs,
   whose first instruction patches the immediate of the second. QEMU runs a block at a time,
   so the store cuts its block short and QEMU runs the block again from the store (issue 20:
   the plugin counts a block at once, and the next block starting inside it says where it
   stopped). Like loops.c, no libc: built -nostdlib -static, the step and qemu backends must
   record the same instructions. Exits 0 if every call ran the patched code. */
typedef unsigned long u64;

static long sys6(long nr, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* nop; movb $5, 1(%rip) (the immediate of the next instruction); mov $1, %eax; ret. The
   nop first: the instructions before the store retire before QEMU stops the block. */
static const unsigned char PATCHING[] = {0x90, 0xc6, 0x05, 0x01, 0, 0, 0, 0x05, 0xb8, 1, 0, 0, 0, 0xc3};

int main(void) {
    /* mmap(NULL, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) */
    volatile unsigned char *code = (volatile unsigned char *)sys6(9, 0, 4096, 7, 0x22, -1, 0);
    if ((long)code < 0)
        return 2;
    for (unsigned i = 0; i < sizeof PATCHING; i++)
        code[i] = PATCHING[i];
    int patched = 0;
    for (int i = 0; i < 40; i++) {
        code[9] = 1; /* back to `mov $1, %eax`, from another block */
        patched += ((int (*)(void))code)() == 5;
    }
    return patched == 40 ? 0 : 1;
}

__attribute__((noreturn)) void _start(void) {
    int status = main();
    for (;;)
        sys6(231, status, 0, 0, 0, 0, 0);
}

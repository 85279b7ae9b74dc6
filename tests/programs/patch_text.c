/* Code patched in place inside the program's own text: the page is made writable, and the
   function's first store rewrites the immediate of an `add` two instructions later. The
   image still holds the old immediate (7), so replay must not compute rax from it: after
   the patched `add`, rax is 45 on the CPU; from the image's code it would be 10. */
#include <stdint.h>
#include <sys/mman.h>

extern long patched(void);
__asm__(".text\n"
        ".globl patched\n"
        "patched:\n"
        "  xor %eax, %eax\n"
        "  movb $42, patch_imm(%rip)\n"
        "  addq $3, %rax\n"
        "  .byte 0x48, 0x05\n" /* add rax, imm32 */
        "patch_imm:\n"
        "  .long 7\n"
        ".globl after_add\n"
        "after_add:\n"
        "  addq $1, %rax\n"
        "  ret\n");

int main(void) {
    uintptr_t page = (uintptr_t)patched & ~4095UL;
    if (mprotect((void *)page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC))
        return 2;
    return patched() == 46 ? 0 : 1;
}

# A static, non-PIE program for the corrupt-recording corpus (tests/corrupt/): a loop whose
# never-taken branch guards `for (;;);`, so one flipped TNT bit sends a decoder into code
# that needs nothing more from the trace. Built with
#   gcc -nostdlib -static -no-pie -Wl,--build-id=none -o guarded_spin guarded_spin.S
    .text
    .globl _start
    .type _start, @function
_start:
    mov $40, %ecx
    xor %eax, %eax
top:
    cmp $1000, %ecx
    je spin
    call work
    dec %ecx
    jne top
    mov $60, %eax
    xor %edi, %edi
    syscall
spin:
    jmp spin
    .size _start, .-_start

    .globl work
    .type work, @function
work:
    test $1, %ecx
    jne odd
    add %ecx, %eax
    ret
odd:
    sub %ecx, %eax
    ret
    .size work, .-work

# A static, non-PIE program for the history tests: main calls outer in a loop, outer calls
# inner, inner has an if/else; then exit. Built with
#   gcc -nostdlib -static -no-pie -Wl,--build-id=none -o nested nested.S
    .text
    .globl _start
    .type _start, @function
_start:
    mov $3, %rcx
loop:
    call outer
    dec %rcx
    jne loop
    jmp done
    .size _start, .-_start

    .globl outer
    .type outer, @function
outer:
    add $1, %rax
    call inner
    add $2, %rax
    ret
    .size outer, .-outer

    .globl inner
    .type inner, @function
inner:
    test $1, %rax
    jne odd
    add %rax, %rax
    ret
odd:
    sub $1, %rax
    ret
    .size inner, .-inner

    .globl done
    .type done, @function
done:
    mov $60, %eax
    xor %edi, %edi
    syscall
    .size done, .-done

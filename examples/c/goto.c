/* Computed goto (labels as values): a tiny bytecode interpreter. */
#include <stdio.h>

int main(void) {
    static const unsigned char code[] = {0, 1, 0, 2, 1, 0, 3};
    static void *const dispatch[] = {&&inc, &&dbl, &&dec, &&stop};
    int acc = 1, pc = 0, loops = 0;
again:
    pc = 0;
    goto *dispatch[code[pc++]];
inc:
    acc++;
    goto *dispatch[code[pc++]];
dbl:
    acc *= 2;
    goto *dispatch[code[pc++]];
dec:
    acc--;
    goto *dispatch[code[pc++]];
stop:
    if (++loops < 4)
        goto again;
    printf("acc %d\n", acc);
    return 0;
}

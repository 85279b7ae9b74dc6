/* setjmp/longjmp: a non-local return out of nested calls. */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;

static void inner(int depth) {
    if (depth == 0)
        longjmp(env, 42);
    inner(depth - 1);
}

int main(void) {
    int rounds = 0;
    for (int i = 0; i < 3; i++) {
        int v = setjmp(env);
        if (v == 0)
            inner(5);
        else
            rounds += v;
    }
    printf("rounds %d\n", rounds);
    return rounds == 126 ? 0 : 1;
}

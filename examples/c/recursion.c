/* Recursion and a loop: fib by naive recursion, then a sum over the results. */
#include <stdio.h>

static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(void) {
    int total = 0;
    for (int i = 0; i < 12; i++)
        total += fib(i);
    printf("total %d\n", total);
    return total == 232 ? 0 : 1;
}

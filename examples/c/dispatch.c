/* Function-pointer dispatch and a switch that compiles to a jump table. */
#include <stdio.h>

static int add(int a, int b) { return a + b; }
static int sub(int a, int b) { return a - b; }
static int mul(int a, int b) { return a * b; }
static int (*const ops[])(int, int) = {add, sub, mul};

static int classify(int x) {
    switch (x % 7) { /* dense cases: a jump table at -O1 and above */
    case 0: return 3;
    case 1: return 1;
    case 2: return 4;
    case 3: return 1;
    case 4: return 5;
    case 5: return 9;
    default: return 2;
    }
}

int main(void) {
    int acc = 1;
    for (int i = 0; i < 30; i++)
        acc = ops[i % 3](acc, classify(i)) & 0xffff;
    printf("acc %d\n", acc);
    return 0;
}

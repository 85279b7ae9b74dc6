/* Works for a while (argv[1] rounds of a loop that calls a function and writes an array),
   then crashes three calls deep through a NULL pointer: a crash at the end of a long
   history, as a user would record one. The two functions that run only at the crash each
   start a page of their own, apart from the loop's: the recording's list of the code each
   stretch ran then says they run in its last stretch alone. */
#include <stdlib.h>

static unsigned long table[256];

static unsigned long mix(unsigned long x) { return (x * 2654435761u) ^ (x >> 7); }

__attribute__((noinline, aligned(4096))) static void store(long *where, long value, int depth) {
    if (depth > 0)
        store(where, value + depth, depth - 1);
    else
        *where = value;
}

__attribute__((noinline, aligned(4096))) static void finish(long *where, long value) {
    store(where, value, 2);
}

int main(int argc, char **argv) {
    unsigned long rounds = argc > 1 ? strtoul(argv[1], 0, 10) : 1000;
    unsigned long sum = 0;
    for (unsigned long i = 0; i < rounds; i++) {
        sum += mix(i);
        table[i & 255] ^= sum;
    }
    long *where = sum == 42 ? (long *)table : NULL;
    finish(where, (long)(sum & 0xffff));
    return (int)table[0];
}

/* Deep recursion: only the innermost call/return pair of each descent is compressed,
   since RTIT keeps one LAST_CALL_NLIP, not a stack. */
#include <stdio.h>

static long down(int n) { return n == 0 ? 1 : 1 + down(n - 1); }

int main(void) {
    long total = 0;
    for (int i = 0; i < 4; i++)
        total += down(150);
    printf("total %ld\n", total);
    return total == 604 ? 0 : 1;
}

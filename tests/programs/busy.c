/* Busy until killed, with a branch in every pass: for the signal tests of rtit record, where
   the last branches' bits are still in RTIT_TNT_BUFF when recording stops. */
volatile unsigned long sum;

int main(void) {
    for (unsigned long i = 0;; i++) {
        if (i % 7)
            sum += i;
        else
            sum ^= i;
    }
}

/* Spins until killed: for the SIGINT test of rtit record. */
int main(void) {
    volatile unsigned long n = 0;
    for (;;)
        n++;
}

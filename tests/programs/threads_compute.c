/* Two threads compute without a system call for a while each, then main joins them: under
   the qemu backend one of them always waits for its turn inside QEMU, where the recorder
   parks the running one to take an anchor. */
#include <pthread.h>
#include <stdio.h>

static void *work(void *arg) {
    unsigned long x = (unsigned long)arg, sum = 0;
    for (long i = 0; i < 3000000; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        sum += x >> 33;
    }
    return (void *)sum;
}

int main(void) {
    pthread_t a, b;
    void *ra, *rb;
    pthread_create(&a, NULL, work, (void *)1);
    pthread_create(&b, NULL, work, (void *)2);
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    printf("%lu %lu\n", (unsigned long)ra, (unsigned long)rb);
    return 0;
}

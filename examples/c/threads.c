/* Creates a thread, which sums 1..1000 for main to print. Threads are not recorded yet: the
   recording stops before the thread is created, and the program runs on to its end
   unrecorded, its output and exit status intact. */
#include <pthread.h>
#include <stdio.h>

static void *work(void *arg) {
    long n = (long)arg, sum = 0;
    for (long i = 1; i <= n; i++)
        sum += i;
    return (void *)sum;
}

int main(void) {
    pthread_t t;
    void *sum;
    pthread_create(&t, NULL, work, (void *)1000);
    pthread_join(t, &sum);
    printf("sum %ld\n", (long)sum);
    return 7;
}

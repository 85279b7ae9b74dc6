/* Two workers take turns on a shared total under a mutex; the second one dereferences a
   null pointer on its fifth round. Replayed, `continue` stops at the SIGSEGV in that worker,
   named as the thread that got it, with its own backtrace, while the others wait. */
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long total;

static void record_round(long *slot, long value) { *slot += value; }

static void *worker(void *arg) {
    long id = (long)arg;
    for (int round = 0; round < 8; round++) {
        pthread_mutex_lock(&lock);
        long *slot = (id == 2 && round == 4) ? NULL : &total;
        record_round(slot, id);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, worker, (void *)1);
    pthread_create(&b, NULL, worker, (void *)2);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("total %ld\n", total);
    return 0;
}

/* Four threads add to a counter under a mutex, and a producer hands numbers to a consumer
   through a queue with condition variables: the threads block on each other in futex waits,
   so a recording of it switches between them both at blocked system calls and at turns. */
#include <pthread.h>
#include <stdio.h>

#define WORKERS 4
#define ROUNDS 50
#define ITEMS 20

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static long counter;
static int queue[4], head, count, done;

static void *add(void *arg) {
    long step = (long)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&lock);
        counter += step;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static void *produce(void *arg) {
    (void)arg;
    for (int i = 1; i <= ITEMS; i++) {
        pthread_mutex_lock(&lock);
        while (count == 4)
            pthread_cond_wait(&changed, &lock);
        queue[(head + count++) % 4] = i;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_lock(&lock);
    done = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static long consume(void) {
    long sum = 0;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (count == 0 && !done)
            pthread_cond_wait(&changed, &lock);
        if (count == 0)
            break;
        sum += queue[head];
        head = (head + 1) % 4;
        count--;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    return sum;
}

int main(void) {
    pthread_t t[WORKERS], p;
    for (long i = 0; i < WORKERS; i++)
        pthread_create(&t[i], NULL, add, (void *)(i + 1));
    pthread_create(&p, NULL, produce, NULL);
    long sum = consume();
    for (int i = 0; i < WORKERS; i++)
        pthread_join(t[i], NULL);
    pthread_join(p, NULL);
    printf("counter %ld, queue sum %ld\n", counter, sum);
    return 0;
}

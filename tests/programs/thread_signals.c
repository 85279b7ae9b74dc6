/* The main thread sends SIGUSR1 to a worker that waits on a condition variable, three times,
   each after the worker's handler counted the one before (the main thread sleeps 100 us at
   a time meanwhile: the worker must run while it sleeps, as it would natively). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static volatile int hits;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int ready, done;
static void on_usr1(int s) { (void)s; hits++; }
static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    ready = 1;
    pthread_cond_signal(&c);
    while (!done) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    return NULL;
}
int main(void) {
    signal(SIGUSR1, on_usr1);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_mutex_lock(&m);
    while (!ready) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    for (int i = 0; i < 3; i++) {
        pthread_kill(t, SIGUSR1);
        while (hits < i + 1)
            usleep(100);
    }
    pthread_mutex_lock(&m);
    done = 1;
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    pthread_join(t, NULL);
    printf("hits %d\n", hits);
    return 0;
}

/* Creates a process: the child works a while and exits, the parent waits for it, then works
 * too. For the tests of how rtit records a program whose children run unrecorded. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long work(unsigned long n) {
    volatile unsigned long sum = 0;
    for (unsigned long i = 0; i < n; i++)
        sum += i % 7;
    return sum;
}

int main(void) {
    pid_t pid = fork();
    if (pid == 0)
        _exit(work(300000) % 2);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("child %d exited with %d; parent %lu\n", (int)pid, WEXITSTATUS(status), work(3000));
    return 0;
}

/* Calls execve: the step backend stops before it (not supported). */
#include <unistd.h>

int main(void) {
    char *argv[] = {"/bin/true", 0};
    execv("/bin/true", argv);
    return 3;
}

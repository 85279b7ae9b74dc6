/* Calls execve: recording stops before it (not followed yet), and the program it runs, here
   `sh -c 'echo ran; exit 5'`, runs to its end unrecorded, its output and status intact. */
#include <unistd.h>

int main(void) {
    char *argv[] = {"/bin/sh", "-c", "echo ran; exit 5", 0};
    execv("/bin/sh", argv);
    return 3;
}

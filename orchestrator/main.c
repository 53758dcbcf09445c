/* dagrun: being written. */
#include <string.h>
#include "worker.h"
int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "__worker") == 0)
    return worker_main(argv[2]);
  return 2;
}

#include "registry.h" /* placeholder: being written */

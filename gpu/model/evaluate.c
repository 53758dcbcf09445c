#include "evaluate.h" /* placeholder: being written */

#include "weights.h" /* placeholder: being written */

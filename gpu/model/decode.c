#include "decode.h" /* placeholder: being written */

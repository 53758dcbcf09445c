#include "textgen.h" /* placeholder: being written */

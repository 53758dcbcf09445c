#include "modeldir.h" /* placeholder: being written */

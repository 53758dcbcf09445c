#include <dagrun/plugin.h> /* placeholder: being written */

// Not a violation: the neighbour in a second role of the seeded links (negative case). The same
// code as benign.cu under the names of component "n".
#define v_run n_run
#define pl_bind_v pl_bind_n
#include "benign.cu"

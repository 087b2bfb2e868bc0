// libpq, PostgreSQL's C client. Its header lives in a postgresql/ subfolder found through pkg-config.
#ifndef ROUSE_CLIBPQ_H
#define ROUSE_CLIBPQ_H
#include <libpq-fe.h>
#endif

// CLEAVE_MPI_CHECK: turns a non-MPI_SUCCESS return code into a BackendError naming the statement and the
// MPI_Error_string text. Communicators set MPI_ERRORS_RETURN on their handles so codes reach this check
// instead of MPI's default abort.
#pragma once

#include <mpi.h>

#include <string>

#include "engine/core/error.hpp"

namespace cleave::comm {

std::string mpi_error_string(int code);  // MPI_Error_string text plus the error class

}  // namespace cleave::comm

#define CLEAVE_MPI_CHECK(stmt)                                                                            \
  do {                                                                                                    \
    const int cleave_mpi_status_ = (stmt);                                                                \
    CLEAVE_VENDOR_CHECK("MPI", cleave_mpi_status_, cleave_mpi_status_ == MPI_SUCCESS,                     \
                        ::cleave::comm::mpi_error_string(cleave_mpi_status_), #stmt);                     \
  } while (0)

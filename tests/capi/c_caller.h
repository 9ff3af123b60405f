/* Calls into the C API from C, with enum arguments given as plain ints.
 *
 * A C caller may pass any int where soma.h declares an enum (C enums are ints); in C++ a value
 * outside an enum's range cannot even be formed without undefined behaviour. These helpers,
 * compiled as C, let the C++ tests pass such values the way a C program would, so the tests show
 * how the library copes with them (bad_input_test.cpp, S1_BadInput.CCaller...). */
#ifndef SOMA_TESTS_CAPI_C_CALLER_H
#define SOMA_TESTS_CAPI_C_CALLER_H

#include <soma/soma.h>

#ifdef __cplusplus
extern "C" {
#endif

somaError_t c_caller_pool_get_attribute(somaMemPool_t pool, int attr, void* value);
somaError_t c_caller_pool_set_attribute(somaMemPool_t pool, int attr, void* value);
somaError_t c_caller_device_get_attribute(int* value, int attr, int device);
/* somaMemPoolCreate with valid props for `device` except the three raw fields. */
somaError_t c_caller_pool_create(somaMemPool_t* pool, int device, int alloc_type, int location_type,
                                 int handle_types);
const char* c_caller_error_name(int error);
const char* c_caller_error_string(int error);

#ifdef __cplusplus
}
#endif

#endif /* SOMA_TESTS_CAPI_C_CALLER_H */

/* See c_caller.h: C callers passing arbitrary ints where soma.h declares enums. */
#include "c_caller.h"

#include <string.h>

somaError_t c_caller_pool_get_attribute(somaMemPool_t pool, int attr, void* value) {
  return somaMemPoolGetAttribute(pool, (somaMemPoolAttr)attr, value);
}

somaError_t c_caller_pool_set_attribute(somaMemPool_t pool, int attr, void* value) {
  return somaMemPoolSetAttribute(pool, (somaMemPoolAttr)attr, value);
}

somaError_t c_caller_device_get_attribute(int* value, int attr, int device) {
  return somaDeviceGetAttribute(value, (somaDeviceAttr)attr, device);
}

somaError_t c_caller_pool_create(somaMemPool_t* pool, int device, int alloc_type, int location_type,
                                 int handle_types) {
  somaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = (somaMemAllocationType)alloc_type;
  props.handleTypes = (somaMemAllocationHandleType)handle_types;
  props.location.type = (somaMemLocationType)location_type;
  props.location.id = device;
  return somaMemPoolCreate(pool, &props);
}

const char* c_caller_error_name(int error) { return somaGetErrorName((somaError_t)error); }

const char* c_caller_error_string(int error) { return somaGetErrorString((somaError_t)error); }

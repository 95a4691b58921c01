/* VK_KHR_cooperative_matrix declarations for Vulkan headers older than
 * 1.3.255 (Debian 12 ships 1.3.239). Newer headers define the extension
 * macro and win; the values here are the registry's. The component-type and
 * scope enums are the NV ones the KHR extension later aliased. */
#ifndef RSSM_VK_COMPAT_H
#define RSSM_VK_COMPAT_H

#include "volk.h"

#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_cooperative_matrix 1
#define VK_KHR_COOPERATIVE_MATRIX_SPEC_VERSION 2
#define VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME "VK_KHR_cooperative_matrix"

#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)

typedef VkComponentTypeNV VkComponentTypeKHR;
#define VK_COMPONENT_TYPE_FLOAT16_KHR VK_COMPONENT_TYPE_FLOAT16_NV
#define VK_COMPONENT_TYPE_FLOAT32_KHR VK_COMPONENT_TYPE_FLOAT32_NV

typedef VkScopeNV VkScopeKHR;
#define VK_SCOPE_SUBGROUP_KHR VK_SCOPE_SUBGROUP_NV

typedef struct VkCooperativeMatrixPropertiesKHR {
    VkStructureType sType;
    void *pNext;
    uint32_t MSize;
    uint32_t NSize;
    uint32_t KSize;
    VkComponentTypeKHR AType;
    VkComponentTypeKHR BType;
    VkComponentTypeKHR CType;
    VkComponentTypeKHR ResultType;
    VkBool32 saturatingAccumulation;
    VkScopeKHR scope;
} VkCooperativeMatrixPropertiesKHR;

typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix;
    VkBool32 cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;

typedef VkResult(VKAPI_PTR *PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
    VkPhysicalDevice physicalDevice, uint32_t *pPropertyCount,
    VkCooperativeMatrixPropertiesKHR *pProperties);
#endif

#endif

//! The one NVML call the collector needs that `nvml-wrapper` 0.13 does not
//! wrap: a MIG device's GPU-instance id (`nvmlDeviceGetGpuInstanceId`),
//! which GPM needs to sample that instance on its parent.
//!
//! The symbol comes from the library `nvml-wrapper` already loaded
//! (`Nvml::lib()`); the device handle from `Device::handle()`. Both stay
//! valid while the `Nvml` and the `Device` they came from are alive, which
//! the borrows below guarantee.

use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::{Device, Nvml};

/// The GPU-instance id of a MIG device handle.
pub(super) fn gpu_instance_id(nvml: &Nvml, device: &Device<'_>) -> Result<u32, NvmlError> {
    let symbol = nvml
        .lib()
        .nvmlDeviceGetGpuInstanceId
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let mut id: std::os::raw::c_uint = 0;
    // SAFETY: `symbol` is NVML's own `nvmlDeviceGetGpuInstanceId`, loaded
    // with the library `nvml` holds open; `device.handle()` is a handle NVML
    // gave for that library, alive as long as `device` borrows `nvml`; `id`
    // is a valid place for the one `unsigned int` NVML writes.
    let code = unsafe { symbol(device.handle(), &mut id) };
    nvml_try(code)?;
    Ok(id)
}

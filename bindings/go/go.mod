// SPDX-License-Identifier: BSD-2-Clause

module procreg

go 1.19

module procreg

go 1.19

module cirecipe

go 1.26.0

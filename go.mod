module github.com/detcoll/detcoll

go 1.26

package handlers

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-playground/validator/v10"

	"github.com/nqd-dev/nqd/event"
)

// The validation tags nqd adds; each applies a rule of the event package so
// that the API and the stores cannot disagree.
var nameRules = map[string]struct {
	valid func(string) bool
	rule  string
}{
	"event_kind":   {event.ValidKind, event.KindRule},
	"context_type": {event.ValidType, event.TypeRule},
	"context_id":   {event.ValidContextID, event.ContextIDRule},
	"key_name":     {event.ValidName, event.NameRule},
}

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	for tag, r := range nameRules {
		valid := r.valid
		err := v.RegisterValidation(tag, func(fl validator.FieldLevel) bool {
			return valid(fl.Field().String())
		})
		if err != nil {
			panic(fmt.Sprintf("handlers: register validation %s: %v", tag, err))
		}
	}
	return v
}

// validateStruct checks s and, when it breaks rules, returns a validation
// error whose fields carry prefix (e.g. `events[3].`) before each JSON name.
func (a *API) validateStruct(s any, prefix string) error {
	err := a.validate.Struct(s)
	if err == nil {
		return nil
	}
	var verrs validator.ValidationErrors
	if !errors.As(err, &verrs) {
		return err
	}
	return invalid(fieldRules(verrs, prefix))
}

// fieldRules names each failed field by its JSON path below the validated
// struct and the rule it breaks.
func fieldRules(verrs validator.ValidationErrors, prefix string) map[string]string {
	fields := make(map[string]string, len(verrs))
	for _, fe := range verrs {
		path := fe.Namespace()
		if _, rest, ok := strings.Cut(path, "."); ok {
			path = rest // drop the Go name of the validated struct
		}
		fields[prefix+path] = ruleText(fe)
	}
	return fields
}

func ruleText(fe validator.FieldError) string {
	if r, ok := nameRules[fe.Tag()]; ok {
		return r.rule
	}
	switch fe.Tag() {
	case "required":
		return "required"
	case "max":
		if fe.Kind() == reflect.String {
			return "at most " + fe.Param() + " characters"
		}
		return "at most " + fe.Param()
	case "min", "gte":
		return "at least " + fe.Param()
	default:
		return "breaks the rule " + fe.Tag()
	}
}
